"""The multi-PD host: a program's contexts spread over several PDs, one per process. Each file runs
on one side of the process boundary (tests/test_layout.py holds it):

the main process   kind.py       the kind of host (hosts.KINDS): chooses the placement, opens the fleet
                   placement.py  which contexts go on which PD (and the Belady simulation `inspect --pd` shows)
                   devices.py    which HTP device each PD's backend opens
                   fleet.py      MultiPdPool: PD 0's pool here, the workers, what plans and Program ask
                   handle.py     PdWorker: this process's handle on one worker (spawn, control, stop)
                   remote.py     RemoteCall / RemoteContext: a worker's graph as plans call it
                   segment.py    RemoteSegment: the step that has a worker run its part of a plan
the PD worker      worker.py     the worker process: its backend, its pool, its calls, its loop
                   worker_segment.py  a plan segment rebuilt in the worker and run on request
both sides         protocol.py   the typed messages (WorkerConfig, requests, replies, the status block)
                   channel.py    the frames of a call and a segment run, the shared arena
                   portable.py   steps as typed descriptors (described here, rebuilt there)
"""
