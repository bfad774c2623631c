"""The test suite (a package, so every helper is imported as ``tests.support.<module>``)."""
