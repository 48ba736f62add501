"""Generated corral.v1 wire types (do not edit; run scripts/gen_protos.py)."""
