# Checks the broker's layering from its folders (docs/architecture.md):
# each folder of broker/ with a CMakeLists.txt is a layer, built as one
# library whose switchyard_broker_layer(... LAYERS ...) names the layers it
# links; a file of a layer may include broker headers of its own layer and
# of the layers it links (directly or through them), nothing else. No
# source file sits in broker/ itself, outside a layer. The compiler enforces
# the same (each layer sees only the headers of what it links: see
# switchyard_include_root); this check names every violation at once.
# Run: cmake -DBROKER=<dir> -P check_layers.cmake

cmake_minimum_required(VERSION 3.25)
file(GLOB entries RELATIVE "${BROKER}" "${BROKER}/*")
set(layers "")
foreach(entry IN LISTS entries)
  if(IS_DIRECTORY "${BROKER}/${entry}" AND EXISTS "${BROKER}/${entry}/CMakeLists.txt")
    list(APPEND layers ${entry})
    file(READ "${BROKER}/${entry}/CMakeLists.txt" text)
    set(links_${entry} "")
    if(text MATCHES "LAYERS([a-z ]*)")
      string(STRIP "${CMAKE_MATCH_1}" below)
      string(REPLACE " " ";" links_${entry} "${below}")
    endif()
  endif()
endforeach()
if(NOT layers)
  message(FATAL_ERROR "no layer folders found in ${BROKER}")
endif()

set(failures "")
file(GLOB stray RELATIVE "${BROKER}" "${BROKER}/*.hpp" "${BROKER}/*.cpp")
foreach(file IN LISTS stray)
  string(APPEND failures "\n  broker/${file} is in no layer: put it in the folder of its layer")
endforeach()

# What each layer may use: itself and, transitively, what it links.
foreach(layer IN LISTS layers)
  set(reach ${layer})
  set(todo ${links_${layer}})
  while(todo)
    list(POP_FRONT todo next)
    if(NOT next IN_LIST layers)
      string(APPEND failures "\n  broker/${layer}/CMakeLists.txt links '${next}', which is not a layer folder")
      continue()
    endif()
    if(NOT next IN_LIST reach)
      list(APPEND reach ${next})
      list(APPEND todo ${links_${next}})
    endif()
  endwhile()
  if(layer IN_LIST links_${layer})
    string(APPEND failures "\n  broker/${layer} links itself")
  endif()
  foreach(other IN LISTS reach)
    if(NOT other STREQUAL layer AND layer IN_LIST reach_${other})
      string(APPEND failures "\n  broker/${layer} and broker/${other} link each other (a cycle)")
    endif()
  endforeach()
  set(reach_${layer} ${reach})

  file(GLOB_RECURSE sources RELATIVE "${BROKER}/${layer}" "${BROKER}/${layer}/*.hpp" "${BROKER}/${layer}/*.cpp")
  foreach(source IN LISTS sources)
    file(STRINGS "${BROKER}/${layer}/${source}" includes REGEX "^#include \"broker/")
    foreach(line IN LISTS includes)  # a .h is a layer's generated header (flatc)
      if(NOT line MATCHES "^#include \"broker/([a-z_]+)/[a-z_]+\\.(hpp|h)\"")
        string(APPEND failures "\n  broker/${layer}/${source}: ${line} names no layer folder")
        continue()
      endif()
      set(used ${CMAKE_MATCH_1})
      if(NOT used IN_LIST reach)
        string(APPEND failures
               "\n  broker/${layer}/${source} includes broker/${used}/, a layer broker/${layer} does not link")
      endif()
    endforeach()
  endforeach()
endforeach()

if(failures)
  message(FATAL_ERROR "broker layering violated:${failures}")
endif()
list(LENGTH layers count)
message(STATUS "broker: ${count} layers (${layers}), each including only what it links")
