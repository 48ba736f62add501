"""The reliability and security suite (a package: its teammate and flood helpers also run as `python -m` children)."""
