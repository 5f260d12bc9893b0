"""What the tests share besides fixtures (the fixtures are in tests/conftest.py).

    paths.py       the repository root and the shared labelled data
    fakes.py       injected instead of real time: RecordingSleep, SleepLog, FakeClock, NoJitter
    hooks.py       the fake judge's on_request hooks: hold requests, meet, an outage at request n
    exact.py       the score computed exactly (Fractions), the reference for the floats
    job.py         job configs, inputs whose scores are known, published tables read back
    inputs.py      input files and rows for the tests of jobs.inputs
    published.py   published runs written directly, for the tools that read them
    moto.py        the moto S3 server and its storage options
    s3_faults.py   FaultyS3: an S3 endpoint the tests break on purpose
    http.py        a hand-written HTTP server, for answers the fake judge never gives

Test modules import from here, never from each other.
"""
