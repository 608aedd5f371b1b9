"""Build configuration beyond pyproject.toml: the C record walk (gregor/protocol/_recordwalk.c), the
C Arrow decoder of the client (gregor/client/_arrowbatch.c) and the C Avro decoder of gregor.typed
(gregor/typed/_avrodecode.c).

The extensions are optional: where no compiler is available the install still succeeds and
gregor.protocol.validator, gregor.client.decoder and gregor.typed fall back to pure Python (much slower per record).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "gregor.protocol._recordwalk",
            ["gregor/protocol/_recordwalk.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
        Extension(
            "gregor.client._arrowbatch",
            ["gregor/client/_arrowbatch.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
        Extension(
            "gregor.typed._avrodecode",
            ["gregor/typed/_avrodecode.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
    ]
)
