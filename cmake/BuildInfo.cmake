# Run at build time (cmake -P), every build: writes OUT, the header strata --version prints from,
# only when its text changed (so nothing recompiles when the commit is the same).
#   -DSOURCE_DIR=... -DOUT=... -DVERSION=... -DCUDA=ON|OFF -DCUDA_ARCHITECTURES=...
set(commit "unknown")
find_program(GIT git)
if(GIT AND EXISTS "${SOURCE_DIR}/.git")
  execute_process(COMMAND "${GIT}" -C "${SOURCE_DIR}" rev-parse --short=12 HEAD
                  OUTPUT_VARIABLE head OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc ERROR_QUIET)
  if(rc EQUAL 0 AND head)
    set(commit "${head}")
    # Tracked files changed since that commit: the binary is not that commit's.
    execute_process(COMMAND "${GIT}" -C "${SOURCE_DIR}" status --porcelain --untracked-files=no
                    OUTPUT_VARIABLE changes RESULT_VARIABLE rc ERROR_QUIET)
    if(rc EQUAL 0 AND NOT changes STREQUAL "")
      string(APPEND commit "-dirty")
    endif()
  endif()
endif()
if(CUDA)
  set(cuda_line "compiled in (architectures ${CUDA_ARCHITECTURES})")
else()
  set(cuda_line "not compiled in")
endif()
set(text "#pragma once
// Generated at build time by cmake/BuildInfo.cmake from the source tree's git state: do not edit.
#define STRATA_VERSION \"${VERSION}\"
#define STRATA_GIT_COMMIT \"${commit}\"
#define STRATA_CUDA_BUILD \"${cuda_line}\"
")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
else()
  set(old "")
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
