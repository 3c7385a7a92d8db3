"""Calls sys.exit while being imported."""
import sys

sys.exit(0)
