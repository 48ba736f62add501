"""corral's test suites; a package so that `tests.support` imports alike from tests and from bench."""
