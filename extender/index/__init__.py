"""The device index: every device published in ResourceSlices, as columns, per generation."""
