"""Format layer: one module or package per format."""
