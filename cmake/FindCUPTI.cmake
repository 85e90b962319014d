# FindCUPTI: CUPTI from the CUDA toolkit (extras/CUPTI or the toolkit's own lib) or an installed
# `nvidia/cuda_cupti` Python wheel. Defines CUPTI::cupti (CUDA::cupti when CMake already knows it).
set(_ciuic_cupti_hints ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR} $ENV{CUPTI_ROOT})
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c
      "import importlib.util as u; s=u.find_spec('nvidia.cuda_cupti'); print(s.submodule_search_locations[0] if s else '')"
    OUTPUT_VARIABLE _ciuic_cupti_wheel OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_ciuic_cupti_wheel)
    list(APPEND _ciuic_cupti_hints ${_ciuic_cupti_wheel})
  endif()
endif()
find_path(CUPTI_INCLUDE_DIR cupti.h HINTS ${_ciuic_cupti_hints} ${CUDAToolkit_INCLUDE_DIRS}
          PATH_SUFFIXES include extras/CUPTI/include)
find_library(CUPTI_LIBRARY NAMES cupti HINTS ${_ciuic_cupti_hints} ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES lib lib64 extras/CUPTI/lib64)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUPTI REQUIRED_VARS CUPTI_LIBRARY CUPTI_INCLUDE_DIR)
if(CUPTI_FOUND AND NOT TARGET CUPTI::cupti)
  add_library(CUPTI::cupti UNKNOWN IMPORTED)
  set_target_properties(CUPTI::cupti PROPERTIES IMPORTED_LOCATION "${CUPTI_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${CUPTI_INCLUDE_DIR}")
endif()
