"""Authentication and authorization compatible with RocketMQ 5's ACL 2.0.

- :mod:`.signature`: the ``MQv2-HMAC-SHA1`` request signature (client and server side);
- :mod:`.acl`: users, policies and the evaluation of a request against them (pure);
- :mod:`.acl_file`: the JSON ACL file the broker loads (``--acl FILE``), reloaded on change;
- :mod:`.permissions`: what each RPC of both protocols needs, and where to read the names;
- :mod:`.interceptor`: the gRPC server interceptor that enforces it all.

See docs/security.md, section "Access control".
"""
