"""What the tests, benchmarks and examples run on, shipped so that a user can run them too; nothing
of the library imports it.

* ``synthetic``: the corpus generator (``python -m im2rec.synthetic``);
* ``seaweed``: SeaweedFS's S3 server on loopback ports;
* ``proxy``: a loopback HTTP proxy adding latency and faults in front of it.
"""
