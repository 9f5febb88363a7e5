"""The build stage (named supervise/: tools read a build/ folder as output): the supervised ninja runner and its
attempts, host-wide compile slots and their launcher, the module lock and where locks live, FlashInfer's module
builds, partial GDN modules and their router, and FlashInfer's CuTeDSL compiles once per host. docs/design.md
"Rooms" places it on the data path."""
