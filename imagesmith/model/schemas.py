"""The versioned artifacts the stages hand each other (one name each).

The payload (verify/) writes ``VERIFY_REPORT`` and reads ``VERIFY_CONFIG`` in
its own process, with the standard library only; it spells the same strings.
"""

PLAN = "imagesmith.plan/1"
BUILD_REPORT = "imagesmith.build-report/1"
BUILD_ARTIFACT = "imagesmith.build/1"  # one target after a build job: OUT/<target>/build.json
VERIFY_CONFIG = "imagesmith.verify-config/1"
VERIFY_REPORT = "imagesmith.verify-report/1"
RELEASE = "imagesmith.release/1"
RUN_REPORT = "imagesmith.run-report/1"
DOCTOR = "imagesmith.doctor/1"
FLEET_REPORT = "imagesmith.fleet-report/1"

# Files others write that imagesmith reads (they carry no ``schema`` key: the reader names the kind).
CDI_SPEC = "cdi.spec"  # a Container Device Interface spec (/etc/cdi/*.yaml|json): nvidia-ctk cdi generate writes one
