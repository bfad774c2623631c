"""The broker core that every front-end calls: the broker's state and write path
(:mod:`.broker`), reads and offsets with long polling (:mod:`.messaging`), look-ups by key,
the ids a send gets, request checks shared by the protocols, and the one table from errors
to each protocol's codes (:mod:`.errors`)."""
