"""Build configuration beyond pyproject.toml: the C record walk (gregor/protocol/_recordwalk.c).

The extension is optional: where no compiler is available the install still succeeds and
gregor.protocol.validator falls back to its pure-Python walk (much slower per record).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "gregor.protocol._recordwalk",
            ["gregor/protocol/_recordwalk.c"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
