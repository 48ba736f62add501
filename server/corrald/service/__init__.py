"""The gRPC surface only: one servicer per module (`lead`, `teammate`, `board`), the
interceptor (credentials, roles, lanes, strict requests), conversions and the one
error table. Servicers talk to the `Board`; the daemon's wiring lives in `daemon.py`."""
