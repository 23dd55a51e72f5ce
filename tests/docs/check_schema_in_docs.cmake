# Fails when the schema copy at the end of docs/protocol.md (the ```fbs
# block) differs from protocol/switchyard.fbs.
# Usage: cmake -DSCHEMA=... -DDOC=... -P check_schema_in_docs.cmake
file(READ "${SCHEMA}" schema)
file(READ "${DOC}" doc)
string(FIND "${doc}" "```fbs\n" start)
if(start EQUAL -1)
  message(FATAL_ERROR "${DOC} has no ```fbs block")
endif()
math(EXPR start "${start} + 7")
string(SUBSTRING "${doc}" ${start} -1 rest)
string(FIND "${rest}" "```" stop)
string(SUBSTRING "${rest}" 0 ${stop} block)
if(NOT block STREQUAL schema)
  message(FATAL_ERROR "docs/protocol.md's schema copy differs from protocol/switchyard.fbs: update the doc")
endif()
