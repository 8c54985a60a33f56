# Writes OUTPUT, a header holding the text of INPUT as the string constant NAME in namespace
# NAMESPACE: device code that NVRTC compiles at run time and host tests include as a header.
# Run as: cmake -DINPUT=... -DOUTPUT=... -DNAME=... -DNAMESPACE=... -P EmbedSource.cmake
file(READ ${INPUT} text)
if(text MATCHES "\\)KILN_EMBEDDED\"")
  message(FATAL_ERROR "${INPUT} contains the raw string's closing delimiter")
endif()
get_filename_component(source_name ${INPUT} NAME)
file(WRITE ${OUTPUT}
  "// Generated from ${source_name} by cmake/EmbedSource.cmake at build time: edit that file.\n"
  "#pragma once\n\n"
  "namespace ${NAMESPACE} {\n"
  "inline constexpr const char ${NAME}[] = R\"KILN_EMBEDDED(${text})KILN_EMBEDDED\";\n"
  "}  // namespace ${NAMESPACE}\n")
