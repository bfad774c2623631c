"""rocketlite.v1 over gRPC (``proto/rocketlite/v1``): the messaging, offset, group and
admin services, and the Unix-socket side door of short-circuit reads."""
