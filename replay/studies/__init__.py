"""Published studies reproduced on replay's runs: one folder per study.

A study folder holds its claims as data (what was said, where, the published number, how ours is
measured, the tolerance of the verdict), the measures that read our results, and the page it
writes. The next study is a sibling folder of `efficientagent/`.
"""
