# STRATA_SANITIZE applies to every target of the build (the asan and tsan presets set it).
if(STRATA_SANITIZE)
  string(REPLACE ";" "," _strata_san "${STRATA_SANITIZE}")
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${_strata_san}>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=all>)
  add_link_options(-fsanitize=${_strata_san})
endif()
