"""corrald: the corral daemon."""
