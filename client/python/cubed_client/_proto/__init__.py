# Generated at build time by setup.py from proto/cubed/v1/*.proto (not committed).
