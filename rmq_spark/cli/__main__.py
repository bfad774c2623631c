"""``python -m rmq_spark.cli``: the ``rocketlite`` command."""

import sys

from rmq_spark.cli import main

sys.exit(main())
