"""Harnesses and helpers shared by the tests, imported one way only::

    from tests.support.broker_harness import BrokerProcess
    from tests.support import rocketmq_harness

Nothing here is collected as tests. Some modules are also programs that a test starts as a
process of its own (``python -m tests.support.<module>``, see :mod:`tests.support.scripts`).
This package imports nothing itself: a script that must not load ``rmq_spark`` (the Spark
Connect client) still can live here.
"""
