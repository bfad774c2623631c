"""Everything that is on the wire, in one place: the code generated from rocketlite.v1's
protos (:mod:`.proto_gen`), the conversions between its messages and rocketlite's value
types (:mod:`.v1`), a pull answer's bytes (:mod:`.pull`), the short-circuit read protocol
(:mod:`.short_circuit`) and RocketMQ's remoting protocol as pure codecs (:mod:`.remoting`).
Both ends use them: the broker's front-ends and the clients."""
