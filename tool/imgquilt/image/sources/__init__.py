"""Where images come from: one module per transport, plus the index/manifest reading they share."""
