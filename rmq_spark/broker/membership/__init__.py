"""Who consumes what: consumer-group membership (:mod:`.groups`), queue locks
(:mod:`.locks`) and the groups' settings in subscriptionGroup.json
(:mod:`.subscription_groups`)."""
