"""RocketMQ's remoting protocol as pure codecs: frames and headers (:mod:`.frame`), request
and response codes (:mod:`.codes`), typed headers and batch bodies (:mod:`.headers`) and
the JSON bodies clients and tools parse (:mod:`.bodies`). No sockets here: the broker's
server (:mod:`rmq_spark.broker.remoting`) and the client's transport use them."""

from rmq_spark.wire.remoting.codes import RequestCode, ResponseCode
from rmq_spark.wire.remoting.frame import Command, FrameError, decode, encode, split_frames

__all__ = [
    "Command",
    "FrameError",
    "RequestCode",
    "ResponseCode",
    "decode",
    "encode",
    "split_frames",
]
