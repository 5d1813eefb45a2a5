"""What the tests share: helpers, rigs and fakes (no test module imports another)."""
