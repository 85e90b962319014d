# Run by `cmake --install` (install(CODE) in the top CMakeLists.txt), when the prefix is known: puts
# the ciuic Python package where that prefix's Python looks and writes ciuic/_installed.py, the path
# from the package to the prefix's libciuic. The folder is the first one on the system Python's path
# (/usr/bin/python3, else python3) that lies under the prefix's lib folders and ends in site-packages or
# dist-packages (Debian: /usr/local/lib/python3.11/dist-packages, /usr/lib/python3/dist-packages; RHEL
# and Fedora: .../site-packages); under a prefix that Python does not search (a venv's, /opt/ciuic),
# lib/pythonX.Y/site-packages, and the line says which PYTHONPATH finds it. CIUIC_INSTALL_PYTHONDIR,
# when set at configure time, wins. DESTDIR is honoured.
# In: CIUIC_PYTHON_VERSION, CIUIC_INSTALL_PYTHONDIR, CIUIC_INSTALL_LIBDIR, CIUIC_PYTHON_SOURCE.
set(_prefix "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "/+$" "" _prefix "${_prefix}")
set(_dir "")
set(_on_path FALSE)
if(CIUIC_INSTALL_PYTHONDIR)
  set(_dir "${CIUIC_INSTALL_PYTHONDIR}")
  if(IS_ABSOLUTE "${_dir}")
    file(RELATIVE_PATH _dir "${_prefix}" "${_dir}")
  endif()
else()
  set(_python /usr/bin/python3)
  if(NOT EXISTS "${_python}")
    find_program(_python python3)
  endif()
  if(_python)
    execute_process(COMMAND "${_python}" -c "import sys; print(chr(10).join(p for p in sys.path if p))"
                    OUTPUT_VARIABLE _paths OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc ERROR_QUIET)
    if(_rc EQUAL 0)
      string(REPLACE "\n" ";" _paths "${_paths}")
      foreach(_p IN LISTS _paths)
        string(FIND "${_p}" "${_prefix}/lib" _at)
        if(_at EQUAL 0 AND _p MATCHES "^[^;]*/(site|dist)-packages$")
          file(RELATIVE_PATH _dir "${_prefix}" "${_p}")
          set(_on_path TRUE)
          break()
        endif()
      endforeach()
    endif()
  endif()
  if(NOT _dir)
    set(_dir "lib/python${CIUIC_PYTHON_VERSION}/site-packages")
  endif()
endif()
set(_package "${_prefix}/${_dir}/ciuic")
file(RELATIVE_PATH _to_lib "${_package}" "${_prefix}/${CIUIC_INSTALL_LIBDIR}")
string(REGEX REPLACE "/+$" "" _to_lib "${_to_lib}")
file(INSTALL DESTINATION "${_prefix}/${_dir}" TYPE DIRECTORY FILES "${CIUIC_PYTHON_SOURCE}"
     FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
set(_installed "$ENV{DESTDIR}${_package}/_installed.py")
file(WRITE "${_installed}"
     "# Written by cmake --install: where this package finds libciuic.so, relative to the package.\n"
     "LIBRARY_DIR = \"${_to_lib}\"\n")
list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${_installed}")
if(_on_path)
  message(STATUS "Python package: ${_package} (on the system Python's path)")
else()
  message(STATUS "Python package: ${_package} (PYTHONPATH=${_prefix}/${_dir} for a Python outside the prefix)")
endif()
