"""Guest image build, ISO media, and (under guest/) the code that runs inside the VM."""
