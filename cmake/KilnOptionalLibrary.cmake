# kiln_optional_library(TARGET NAME PREFIX DEFINITION MISSING): defines the interface target
# TARGET for a library kiln uses when it is installed. When ${PREFIX}_INCLUDE_DIR and
# ${PREFIX}_LIBRARY were found, TARGET carries them and the compile definition DEFINITION=1 (in
# kiln's own build only), the status line names them, and ${PREFIX}_USED is ON; otherwise the
# status line says "NAME: MISSING" and ${PREFIX}_USED is OFF.
function(kiln_optional_library target name prefix definition missing)
  add_library(${target} INTERFACE)
  if(${prefix}_INCLUDE_DIR AND ${prefix}_LIBRARY)
    message(STATUS "${name}: ${${prefix}_LIBRARY} (headers ${${prefix}_INCLUDE_DIR})")
    target_include_directories(${target} INTERFACE $<BUILD_INTERFACE:${${prefix}_INCLUDE_DIR}>)
    target_link_libraries(${target} INTERFACE $<BUILD_INTERFACE:${${prefix}_LIBRARY}>)
    target_compile_definitions(${target} INTERFACE $<BUILD_INTERFACE:${definition}=1>)
    set(${prefix}_USED ON PARENT_SCOPE)
  else()
    message(STATUS "${name}: ${missing}")
    set(${prefix}_USED OFF PARENT_SCOPE)
  endif()
endfunction()
