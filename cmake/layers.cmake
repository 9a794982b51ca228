# Note [Layer include roots]: each library of a layer folder exposes only the headers of that
# folder, so the build refuses an include of a layer the library does not link (ARCHITECTURE.md
# §2: daemon -> service -> metrics -> channel -> compute -> storage/kernels/auth -> common).
# A library's include root is a directory of its own under build/layers/ holding symlinks to the
# headers directly in its folder (not its subfolders, which are other libraries): code that
# includes "server/channel/device.h" compiles only where a cubed_channel include root is on the
# path, i.e. in a target that links cubed_channel. Link PRIVATE what only the .cc files use and
# PUBLIC what the headers expose. tests/layering checks the same rules on the include lines, and
# that nothing below the service layer includes gRPC or generated protobuf.

# cubed_layer(TARGET FOLDER): TARGET (a library) exposes the headers directly in FOLDER (relative
# to the project root), as "FOLDER/name.h". Headers added later need a re-configure (globbed).
function(cubed_layer target folder)
  set(root ${PROJECT_BINARY_DIR}/layers/${target})
  file(REMOVE_RECURSE ${root})
  file(MAKE_DIRECTORY ${root}/${folder})
  file(GLOB headers CONFIGURE_DEPENDS
    ${PROJECT_SOURCE_DIR}/${folder}/*.h ${PROJECT_SOURCE_DIR}/${folder}/*.cuh)
  foreach(header IN LISTS headers)
    get_filename_component(name ${header} NAME)
    file(CREATE_LINK ${header} ${root}/${folder}/${name} SYMBOLIC)
  endforeach()
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "INTERFACE_LIBRARY")
    target_include_directories(${target} INTERFACE $<BUILD_INTERFACE:${root}>
      $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/cubed>)
  else()
    target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${root}>
      $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/cubed>)
    set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
    target_compile_options(${target} PRIVATE ${CUBED_WARNINGS})
  endif()
endfunction()
