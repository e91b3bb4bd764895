"""Tools coderoom gives the model beside the SDK's shell: view_image and run_python."""
