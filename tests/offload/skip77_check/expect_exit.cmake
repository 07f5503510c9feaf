# cmake -DEXE=path -DFILTER=gtest-filter -DEXPECT=code -P expect_exit.cmake
# Runs EXE with --gtest_filter=FILTER and fails unless it exits with EXPECT.
execute_process(COMMAND "${EXE}" "--gtest_filter=${FILTER}" RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE out)
if(NOT rc STREQUAL "${EXPECT}")
  message(FATAL_ERROR "${EXE} --gtest_filter=${FILTER} exited with ${rc}, expected ${EXPECT}:\n${out}")
endif()
message(STATUS "--gtest_filter=${FILTER}: exit ${rc} as expected")
