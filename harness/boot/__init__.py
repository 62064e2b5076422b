"""Booting cells: one attempt (`attempt`), the executor that runs cells in slots with GPU hygiene (`executor`), and the
run owner that opens, runs and finishes a run (`session`), which every entry point goes through."""
