# Whether the release build makes the Python extension (python/CMakeLists.txt), included by the
# top-level CMakeLists.txt. STRATA_PYTHON: AUTO (when the build venv has nanobind, and not in a
# sanitizer or fuzz build, where a CPython extension would need the sanitizer runtime preloaded
# into python), ON (nanobind or an error), OFF.
#
# The interpreter is the build venv's (STRATA_PYTHON_VENV, default <source>/build/pyenv, which
# scripts/setup.sh makes with --system-site-packages from /usr/bin/python3 so Debian's torch is
# importable): nanobind, scikit-build-core and pytest live there, never in the system Python.
set(STRATA_PYTHON "AUTO" CACHE STRING "Build the Python package's extension: AUTO, ON, OFF")
set_property(CACHE STRATA_PYTHON PROPERTY STRINGS AUTO ON OFF)
set(STRATA_PYTHON_VENV "${PROJECT_SOURCE_DIR}/build/pyenv" CACHE PATH
    "The venv whose python builds and tests the extension (scripts/setup.sh makes it)")

set(STRATA_HAVE_PYTHON OFF)
set(strata_python_why "")
if(STRATA_PYTHON STREQUAL "OFF")
  set(strata_python_why "STRATA_PYTHON=OFF")
elseif(NOT STRATA_SANITIZE STREQUAL "" OR STRATA_FUZZ)
  set(strata_python_why "sanitizer or fuzz build")
elseif(NOT EXISTS "${STRATA_PYTHON_VENV}/bin/python")
  set(strata_python_why "no venv at ${STRATA_PYTHON_VENV} (scripts/setup.sh makes it)")
else()
  execute_process(COMMAND "${STRATA_PYTHON_VENV}/bin/python" -m nanobind --cmake_dir
                  OUTPUT_VARIABLE strata_nanobind_dir OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE strata_nanobind_rc ERROR_QUIET)
  # Python.h (python3-dev): without it AUTO skips the extension instead of failing configure.
  execute_process(COMMAND "${STRATA_PYTHON_VENV}/bin/python" -c
                          "import os, sysconfig; print(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))"
                  OUTPUT_VARIABLE strata_python_h OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT EXISTS "${strata_python_h}")
    set(strata_python_why "no Python.h for ${STRATA_PYTHON_VENV}/bin/python (install python3-dev)")
  elseif(strata_nanobind_rc EQUAL 0 AND EXISTS "${strata_nanobind_dir}")
    set(STRATA_HAVE_PYTHON ON)
    set(Python_EXECUTABLE "${STRATA_PYTHON_VENV}/bin/python" CACHE FILEPATH "" FORCE)
    set(nanobind_DIR "${strata_nanobind_dir}" CACHE PATH "" FORCE)
  else()
    set(strata_python_why "nanobind is not installed in ${STRATA_PYTHON_VENV}")
  endif()
endif()
if(STRATA_PYTHON STREQUAL "ON" AND NOT STRATA_HAVE_PYTHON)
  message(FATAL_ERROR "STRATA_PYTHON=ON but the extension cannot be built: ${strata_python_why}. "
                      "Run scripts/setup.sh, or configure with -DSTRATA_PYTHON=OFF.")
endif()
if(NOT STRATA_HAVE_PYTHON AND NOT strata_python_why STREQUAL "")
  message(STATUS "strata: Python package not built (${strata_python_why})")
endif()
