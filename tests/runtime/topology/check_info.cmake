# Runs `strata info` and `strata info --json` on this machine (and the device flags) (cmake -P, with STRATA = the binary
# and DIR = a folder to probe). Fails when either exits non-zero, when the text report misses a
# section, or when the JSON does not parse or lacks a field.
foreach(var STRATA DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_info.cmake needs -D${var}=...")
  endif()
endforeach()

execute_process(COMMAND ${STRATA} info --dir ${DIR}
                RESULT_VARIABLE rc OUTPUT_VARIABLE text ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "strata info exited ${rc}:\n${text}\n${err}")
endif()
foreach(section Host CPU NUMA Memory CUDA io_uring O_DIRECT MPI hwloc)
  string(REGEX MATCH "(^|\n)${section}\n" found "${text}")
  if(NOT found)
    message(FATAL_ERROR "strata info has no '${section}' section:\n${text}")
  endif()
endforeach()
message(STATUS "strata info:\n${text}")

execute_process(COMMAND ${STRATA} info --json --dir ${DIR}
                RESULT_VARIABLE rc OUTPUT_VARIABLE json ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "strata info --json exited ${rc}:\n${json}\n${err}")
endif()
# string(JSON) fails on text that is not JSON; each GET also checks that the field exists.
foreach(path "cpu;logical_cores" "cpu;simd_detected" "numa_nodes" "memory;total_bytes"
             "cuda;compiled" "io_uring;works" "o_direct;works" "o_direct;dir" "mpi;rank"
             "mpi;world" "hwloc;compiled")
  string(JSON value ERROR_VARIABLE json_err GET "${json}" ${path})
  if(json_err)
    message(FATAL_ERROR "strata info --json: ${path}: ${json_err}\n${json}")
  endif()
endforeach()
string(JSON dir GET "${json}" o_direct dir)
if(NOT dir STREQUAL DIR)
  message(FATAL_ERROR "strata info --json probed '${dir}', not '${DIR}'")
endif()

# A folder that does not exist is a fact to report, not a failure of the command.
execute_process(COMMAND ${STRATA} info --json --dir ${DIR}/does-not-exist
                RESULT_VARIABLE rc OUTPUT_VARIABLE json ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "strata info --dir <missing> exited ${rc}:\n${err}")
endif()
string(JSON works GET "${json}" o_direct works)
string(JSON reason GET "${json}" o_direct reason)
if(works OR NOT reason MATCHES "ENOENT")
  message(FATAL_ERROR "a missing folder was not reported as such: works=${works} reason='${reason}'")
endif()

# The device flags: the device a run would get is created for real and reported; a flag
# overrides the config file, which overrides the default.
execute_process(COMMAND ${STRATA} info --dir ${DIR} --device host --device-memory 64MiB
                RESULT_VARIABLE rc OUTPUT_VARIABLE text ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT text MATCHES "\nDevice [^\n]*\n  asked +host\n  backend +host\n  arena budget +64.00 MiB")
  message(FATAL_ERROR "strata info --device host --device-memory 64MiB (rc ${rc}):\n${text}\n${err}")
endif()
file(WRITE ${DIR}/device_config.json "{\"strata\": {\"device\": \"host\", \"device_memory\": \"96MiB\"}}")
execute_process(COMMAND ${STRATA} info --json --dir ${DIR} --config ${DIR}/device_config.json
                RESULT_VARIABLE rc OUTPUT_VARIABLE json ERROR_VARIABLE err)
string(JSON budget GET "${json}" device arena_budget_bytes)
if(NOT rc EQUAL 0 OR NOT budget EQUAL 100663296)
  message(FATAL_ERROR "strata info --config: budget '${budget}', rc ${rc}\n${err}")
endif()
execute_process(COMMAND ${STRATA} info --json --dir ${DIR} --config ${DIR}/device_config.json
                        --device-memory 32MiB
                RESULT_VARIABLE rc OUTPUT_VARIABLE json ERROR_VARIABLE err)
string(JSON budget GET "${json}" device arena_budget_bytes)
if(NOT rc EQUAL 0 OR NOT budget EQUAL 33554432)
  message(FATAL_ERROR "--device-memory did not override the config: budget '${budget}'\n${err}")
endif()
# A bad size fails before anything is printed, naming the flag.
execute_process(COMMAND ${STRATA} info --dir ${DIR} --device-memory 12XB
                RESULT_VARIABLE rc OUTPUT_VARIABLE text ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT text STREQUAL "" OR NOT err MATCHES "--device-memory '12XB' is not a size")
  message(FATAL_ERROR "a bad --device-memory was not refused cleanly (rc ${rc}):\n${text}\n${err}")
endif()
