"""The ``reventless`` command run as a user runs it: a subprocess of the installed script."""
