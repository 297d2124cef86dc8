"""The watermark IO manager, and the silver asset's input and output through it."""
