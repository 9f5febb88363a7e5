from jitguard.findings.catalog import markdown

print(markdown(), end="")
