"""Standalone scripts run by the vLLM venv's python (`engines.vllm_env.run_script`), never imported by eagle3lib:
they import only vLLM, torch, safetensors and the standard library, and print one JSON object as their last line.

(The scripts are listed here as they are added; each one's docstring says what it asks the running vLLM.)
"""
