"""A config module imported inside compiled functions (test_hardening.py)."""
SCALE = 2.0
