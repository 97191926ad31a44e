"""Helpers the tests share: fixtures' building blocks, receivers, extractors, process harness."""
