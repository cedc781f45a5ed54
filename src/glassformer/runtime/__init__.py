"""Speed policy, outside the math: measured kernel choices, precision, decode routes."""
