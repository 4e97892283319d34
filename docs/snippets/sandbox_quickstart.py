from skygym_sandboxes import RunRequest, get_sandbox

with get_sandbox("local", limits={"wall_s": 2}) as box:  # warm bubblewrap sandboxes, no network
    result = box.run(RunRequest(code="print(input()[::-1])", stdin="abc"))
    print(result.status, result.stdout.strip())  # ok cba
    hung, crashed = box.run_batch(["while True: pass", "import os; os.abort()"])
    print(hung.status, crashed.status)  # timeout killed
