"""The Spark sink's transactions, kept by the broker: staged sends and the batch ends that
make them visible once (:mod:`.service`), the rules without I/O (:mod:`.state`) and the rows
of one staged send (:mod:`.sends`)."""
