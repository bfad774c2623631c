"""The offset stores do not depend on the client: importing any module of rmq_spark.offsets
loads no rmq_spark.client module (the client depends on the stores, not the other way)."""

from __future__ import annotations

import subprocess
import sys

# Run in a fresh interpreter: this test process has imported the client long ago.
_PROBE = """
import importlib, pkgutil, sys
import rmq_spark.offsets as package
names = [m.name for m in pkgutil.iter_modules(package.__path__, package.__name__ + ".")]
for name in names:
    importlib.import_module(name)
print(",".join(names))
print(",".join(sorted(m for m in sys.modules if m.startswith("rmq_spark.client"))))
"""


def test_importing_every_offsets_module_loads_no_client_module():
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    imported, client_modules = done.stdout.splitlines()
    assert "rmq_spark.offsets.remote_broker" in imported.split(",")
    assert client_modules == ""
