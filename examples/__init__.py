"""Applications built on chatarchive, run by its tests."""
