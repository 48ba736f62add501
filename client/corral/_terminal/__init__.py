"""Showing the board to a person: JSON shapes, tables, one-line event
descriptions, the live board and the Watch pump. Used by the `corral` CLI and
the demo alike, so neither reaches into the other's private modules."""
