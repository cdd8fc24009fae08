//! The CRI `ImageService`: every image "pulls" at once (there is no registry to reach,
//! and nothing runs it), and is listed from then on; the image filesystem is the
//! runtime's root directory, with the usage the kubelet's eviction manager reads.

use std::pin::Pin;
use std::sync::{Arc, Mutex};

use futures::Stream;
use tonic::{Request, Response, Status};

use crate::proto::image_service_server::ImageService;
use crate::proto::*;
use crate::state::State;

/// The image service over the runtime's shared state.
#[derive(Clone)]
pub struct Images {
    pub state: Arc<Mutex<State>>,
    /// Reported as the image filesystem's mount point.
    pub root: std::path::PathBuf,
}

fn image(reference: &str, id: &str) -> Image {
    Image {
        id: id.to_string(),
        repo_tags: vec![reference.to_string()],
        size: 1,
        spec: Some(ImageSpec { image: reference.to_string(), ..Default::default() }),
        ..Default::default()
    }
}

impl Images {
    fn listed(&self) -> Vec<Image> {
        let state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.images.iter().map(|(r, id)| image(r, id)).collect()
    }
}

#[tonic::async_trait]
impl ImageService for Images {
    type StreamImagesStream = Pin<Box<dyn Stream<Item = Result<StreamImagesResponse, Status>> + Send>>;

    async fn list_images(&self, _: Request<ListImagesRequest>) -> Result<Response<ListImagesResponse>, Status> {
        Ok(Response::new(ListImagesResponse { images: self.listed() }))
    }

    async fn stream_images(
        &self,
        _: Request<StreamImagesRequest>,
    ) -> Result<Response<Self::StreamImagesStream>, Status> {
        let images = self.listed();
        Ok(Response::new(Box::pin(futures::stream::once(async move { Ok(StreamImagesResponse { images }) }))))
    }

    async fn image_status(
        &self,
        request: Request<ImageStatusRequest>,
    ) -> Result<Response<ImageStatusResponse>, Status> {
        let reference = request.into_inner().image.map(|i| i.image).unwrap_or_default();
        let state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Not pulled yet: no image, which makes the kubelet pull it (an error would not).
        let found = state.images.get(&reference).map(|id| image(&reference, id));
        Ok(Response::new(ImageStatusResponse { image: found, ..Default::default() }))
    }

    async fn pull_image(&self, request: Request<PullImageRequest>) -> Result<Response<PullImageResponse>, Status> {
        let reference = request.into_inner().image.map(|i| i.image).unwrap_or_default();
        if reference.is_empty() {
            return Err(Status::invalid_argument("PullImage without an image"));
        }
        let id = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pull(&reference);
        Ok(Response::new(PullImageResponse { image_ref: id }))
    }

    async fn remove_image(
        &self,
        request: Request<RemoveImageRequest>,
    ) -> Result<Response<RemoveImageResponse>, Status> {
        let reference = request.into_inner().image.map(|i| i.image).unwrap_or_default();
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.images.retain(|r, id| *r != reference && *id != reference);
        Ok(Response::new(RemoveImageResponse {}))
    }

    async fn image_fs_info(&self, _: Request<ImageFsInfoRequest>) -> Result<Response<ImageFsInfoResponse>, Status> {
        let usage = FilesystemUsage {
            timestamp: crate::state::now_nanos(),
            fs_id: Some(FilesystemIdentifier { mountpoint: self.root.display().to_string() }),
            used_bytes: Some(UInt64Value { value: 0 }),
            inodes_used: Some(UInt64Value { value: 0 }),
        };
        Ok(Response::new(ImageFsInfoResponse {
            image_filesystems: vec![usage.clone()],
            container_filesystems: vec![usage],
        }))
    }
}
