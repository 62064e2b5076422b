"""How close a boot came to running out of memory: a curve sampled while the server boots, on the timeline's clock."""
