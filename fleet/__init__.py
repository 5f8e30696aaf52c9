"""Fleet control: start benchmark agents on AWS where work waits for them, stop them after.

`python -m fleet` runs the controller loop. It needs no torch: nothing here imports
the measuring code.
"""
