# The Python interpreter of the build's tests and scripts (lit and its
# RUN-line helpers, the reference comparisons, the package's tests): Debian's
# /usr/bin/python3 where it exists, else python3 on PATH. Debian's is the one
# that sees python3-torch, and it starts in a few milliseconds, where a pyenv
# shim earlier on PATH takes about half a second a start, paid by every one
# of the hundreds of helper scripts the lit tests run. Setting CAC_PYTHON
# overrides it. (No find_package(Python3) here: pybind11 finds its own, with
# the development component, in python/.)

if(EXISTS /usr/bin/python3)
  set(CAC_PYTHON_DEFAULT /usr/bin/python3)
else()
  find_program(CAC_PYTHON_DEFAULT python3)
endif()
set(CAC_PYTHON ${CAC_PYTHON_DEFAULT} CACHE FILEPATH
    "The Python interpreter the package is built for and the tests run with")
