"""The performance task: timing student calls against the reference, the quiet room, the timing record."""
