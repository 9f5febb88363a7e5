"""The status service, below the GDN op and the engine guard alike: what each GDN backend and each of an engine's
FlashInfer choices can do here, from the pre-flight findings on this process's facts, the failure cache (one
read, one key scheme) and the prebuilt modules. Both callers ask here; neither asks the other."""
