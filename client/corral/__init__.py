"""corral SDK."""
